"""Cosine metric learning for person re-identification (TensorFlow 2)."""

__version__ = "0.1.0"
