"""Who may call: users and their passwords, login tokens, roles and each call's least role,
the signed handles that travel through clients, and call-header handling."""
