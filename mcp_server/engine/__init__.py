"""The engine: compile, validate, bench, audit, docs, stages, device. A plain typed library."""
