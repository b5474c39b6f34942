"""Code the tests share: helpers, fake daemons, the power-loss layer, the chaos engine."""
