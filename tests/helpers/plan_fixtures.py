"""What the plan tests compile (tests/orchestrators/test_plan.py for TPUs, test_plan_gpu.py for
GPUs): a model small everywhere but its head size, that of the real ones, so it compiles in
seconds and its attention runs the kernels a real model's would."""

# A Llama reward model: D 256, 4 query heads and 2 key/value heads of 128, MLP 512, 2 layers.
TINY_LLAMA = {
    "architectures": ["LlamaForSequenceClassification"], "num_labels": 1, "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 1024, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "tie_word_embeddings": False}
