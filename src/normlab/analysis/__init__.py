"""Analysis helpers behind the study's notebooks: each module serves one chapter."""
