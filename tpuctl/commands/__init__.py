"""One module per command group. Each exposes ``register(app)`` and imports only typer/stdlib at
module level; TensorFlow, pulumi_gcp and aiplatform are imported inside the commands that need them."""
