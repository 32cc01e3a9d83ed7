"""Hugging Face folders: import one as a run of a root, export any checkpoint as one; safetensors and JSON only."""
