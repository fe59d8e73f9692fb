"""The service process: the captain and the agent runtime it runs lanes on."""
