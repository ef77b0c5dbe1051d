"""Sharing trained heads (docs/publish.md), the surface's room for it: `publish.py` writes
a run as a folder a Hugging Face model repository holds as it is, with the model card of
`model_card.py`. Loading one back (`hf:OWNER/NAME`) is `flowclip_cache/hub.py`, in the
shared ground, because extraction and scoring read published folders through it."""
