# pytest wiring only: the options, targets, fixtures and run journal live in harness/.
pytest_plugins = ["harness.plugin.hooks"]
