"""The local EVM chains: anvil processes (local), the contracts deployed on
them (start: the CCTP, Stargate and CCIP doubles of cctp, stargate,
layerzero, ccip), the treasury's local keys (keys) and their record in the
chain registry (registry)."""
