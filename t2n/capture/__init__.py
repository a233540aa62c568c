"""Capture: from a user's model (module, ScriptModule, saved file) to one graph of aten ops."""
