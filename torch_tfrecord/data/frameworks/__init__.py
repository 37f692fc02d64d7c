"""Training frameworks' wrappers around a DataLoader (Accelerate, Lightning, transformers),
recognised from inside the dataset, and every private internal of torch's we read or patch."""
