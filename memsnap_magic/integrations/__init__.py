"""Recording from training frameworks: callbacks that put listed optimizer steps in files.

    from memsnap_magic.integrations.transformers import MemsnapCallback   # Hugging Face Trainer
    from memsnap_magic.integrations.lightning import MemsnapCallback      # Lightning

Each is a thin layer over the public ``Recorder``: one ``Recorder(step=N)`` around each listed
optimizer step (its accumulated micro-batches included), in verl's layout, so the dashboard, the
CLI and ``memsnap check`` read the files as they are. Importing this package imports no
framework; importing a module of it needs its framework, installed with the extra it names.
"""

from __future__ import annotations


def missing(framework: str, extra: str, error: ImportError) -> ImportError:
    """The one-line error for an integration whose framework is not installed, or ``error``
    itself where the framework is there but something it imports failed (that is its message)."""
    top = (error.name or "").partition(".")[0]
    if top != framework:
        return error
    return ImportError(
        f"memsnap_magic.integrations.{extra} needs {framework}, which is not installed: "
        f'pip install "memsnap_magic[{extra}]"',
        name=framework,
    )
