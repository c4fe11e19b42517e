"""The on-disk format: verl's layout and our metadata block, safe loading and atomic writing,
the schema check, summary files and the background writer. Imports only ``core``."""
