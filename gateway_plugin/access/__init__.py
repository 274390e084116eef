"""Who may connect: the device registry, hello answers, operator frames."""
