"""normlab inside other libraries' models (today: HuggingFace transformers)."""
