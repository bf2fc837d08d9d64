"""The on-disk side: needs only flatbuffers. Reading `.pte`/`.ptd` files, their layout, the file
analysis that `audit`, `prune` and `dedupe` share, and the writers. Never imports `inprocess`."""
