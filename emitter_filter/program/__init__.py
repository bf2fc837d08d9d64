"""The shared model of an ExecuTorch program that both sides read it through.

Its schemas and their one reading (`fbs_schemas`, `flatbuffer_tables`, the generated
object model's fields), what a program can reach (`reachability`, `named_keys`), the
execution plan's indices (`plan_indices`), what entries are called (`names`,
`state_names`) and which bytes repeat (`duplicates`). Nothing here imports `inprocess/`
or `ondisk/`: both build on it.
"""
