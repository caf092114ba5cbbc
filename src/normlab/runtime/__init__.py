"""What any long run needs, whichever product runs it: progress bars, a worker pool, and provenance."""
