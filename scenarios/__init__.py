"""Scenario files (TOML), installed as package data of ``fk_adapters.scenario_files``."""
