"""Workers: processes driving the runs of one store."""
