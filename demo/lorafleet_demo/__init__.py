"""The demo: a tiny generated Llama and canary adapters, built offline (`assets`).

`lorafleet up` serves them with no arguments, the tests use them as real PEFT adapters, and the
canary probe knows their markers. torch, transformers and peft are imported only when something
is built (the `demo` extra).
"""
