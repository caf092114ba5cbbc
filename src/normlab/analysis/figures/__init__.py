"""One module per chapter: each function draws one of that chapter's figures from the data its analysis returns."""
