"""Peers: other projects' GDN kernels, loaded at run time from their own released files and driven the
way their engines drive them, as benchmark steps beside ours (``bench/steps.py``). Nothing of a peer's
code lives in this repository."""
