"""A sample service following the convention Sundial's `job.cronJob` shorthand assumes."""
