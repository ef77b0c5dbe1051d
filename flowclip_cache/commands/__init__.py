"""Command groups of the flowclip CLI that stand on their own (cli.py registers them)."""
