"""Public test doubles: fake clocks, fake Anthropic, fake Discord."""
