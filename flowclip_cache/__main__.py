"""python -m flowclip_cache (and torchrun -m flowclip_cache ...): the flowclip command."""

from .cli import main

if __name__ == "__main__":
    main()
