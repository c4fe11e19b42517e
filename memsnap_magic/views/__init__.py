"""What people read and see: words, tables, figures and the dashboard. Reads results and the
process state; records nothing."""
