"""Helpers more than one chapter's analysis uses: paired statistics, parity, training jobs, stream statistics, MiniLM."""
