"""A service whose one image carries named one-shot jobs (Sundial's ``job.cronJob`` shorthand)."""
