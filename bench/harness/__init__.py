"""The harness: configuration, launching, the measured run, its record; what every command stands on."""
