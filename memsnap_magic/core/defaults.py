"""The option defaults that layers below the option table need (an interval read from a file
that does not say its tag or stack context takes these). ``recording.options`` uses them."""

TAG = "torch_memory"  # a file name's prefix
CONTEXT = "all"  # which events carry a stack
