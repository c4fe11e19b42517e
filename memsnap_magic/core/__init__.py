"""The shared vocabulary every layer may use: warnings, the device families, category names,
defaults, error and text cleaning. Imports nothing of ours outside ``core``."""
