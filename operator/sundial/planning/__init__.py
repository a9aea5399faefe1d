"""Pure planning and builders: slots, desired objects, judgements, status. No I/O
and no SDK client calls; `now` is always passed in."""
