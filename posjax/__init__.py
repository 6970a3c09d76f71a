"""posjax: compare Transformer position encodings on the same model, data and budget."""

__version__ = "0.1.0"
