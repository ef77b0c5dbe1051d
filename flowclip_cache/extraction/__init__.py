"""Extraction: frozen encoders run once over what manifests name.

Reads manifests (Parquet), images, and an encoder (a registered config, `families/`, with
its weights); writes features (FP16, L2-normalised global, patch and token arrays) into the
store, one committed segment per unit of work. Entry point: `extract.py` (`run_extract`),
after `plan.py` has cut every key into units; `encoders.py` resolves an encoder to the
one fingerprinted configuration the store records."""
