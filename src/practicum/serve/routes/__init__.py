"""The API's routes, one module per resource; `practicum.serve.app` mounts them."""
