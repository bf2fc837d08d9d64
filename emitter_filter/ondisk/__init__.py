"""The on-disk side: needs only flatbuffers, and never imports `inprocess`.

Its folders import only downward: `read/` (a file's bytes, layout and tables), then `analyse/`
(what is dead, what is valid, what programs share) and `write/` (atomic outputs, `.ptd` files),
both on `read/` alone; the modules here are the commands built on them (`audit`, `prune`,
`dedupe`, `explain`, `diff`, `budget`, `share`, `merge` and `split`, in `merge`)."""
