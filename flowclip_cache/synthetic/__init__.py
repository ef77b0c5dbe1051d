"""The synthetic world: scenes drawn on a grid, captions and their hard negatives, splits,
manifests; and the generated sample. A data source like a benchmark's files: it imports
nothing but the manifest writer, and the converters in `datasets/` read it (which is why it
sits below the stages, not above them). Entry point: `world.py` (`build_world`)."""
