"""Training the policy-value network: settings, replay data, the Lightning module."""
