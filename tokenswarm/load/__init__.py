"""Load generation: Locust users, streaming client, load shapes, scenarios and prompts."""
