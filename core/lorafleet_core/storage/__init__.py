"""Local files and the object store: PEFT adapter folders and checksums (`adapter_files`),
manifests folders (`manifests`) and what standalone mode keeps beside them
(`standalone_state`, `replica_endpoints`), merged weights (`merged_weights`), uploads
(`objectstore`)."""
