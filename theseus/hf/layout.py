"""The names of what an imported run keeps beside its checkpoint, in its node's artifact folder.

::

    objects/<node-id>/
        checkpoint/ config.yaml job.json rng.json     the params-only checkpoint, as every checkpoint
        tokenizer/<file>                              the folder's tokenizer files, as they were
        hf/config.json  hf/generation_config.json     the folder's own configs, as they were
        hf/source.json                                every file read from the folder: size and sha256
        MANIFEST.json                                 written last, listing all of the above

>>> f"objects/<id>/{TOKENIZER_FOLDER}/tokenizer.json"
'objects/<id>/tokenizer/tokenizer.json'
"""

TOKENIZER_FOLDER = "tokenizer"
HF_CONFIG_FILE = "hf/config.json"
GENERATION_FILE = "hf/generation_config.json"
SOURCE_FILE = "hf/source.json"
#: the tokenizer files of a Hugging Face folder theseus keeps (JSON and text; a tokenizer.model is a protobuf)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "added_tokens.json", "tokenizer.model", "chat_template.jinja")
#: the dtypes of an import's parameters and an export's tensors, by the names ``--dtype`` takes
DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
          "fp32": "float32", "float32": "float32"}
