"""The local control plane (`ai-inference cluster up|down`) used by tests and the demo."""
