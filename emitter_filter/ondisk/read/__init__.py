"""Reading a `.pte` or `.ptd` file: its bytes (`byte_source`), its layout as ExecuTorch wrote it
(`file_headers`, `segment_layout`, `layout`), the program's tables (`read_pte`, `read_ptd`,
`file_model`, `program_sections`), who reads each byte (`readers`) and which `.ptd` files a
program reads (`data_files`). Imports nothing else of `ondisk/`."""
