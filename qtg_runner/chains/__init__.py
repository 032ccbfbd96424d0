"""EVM chains as the runtime speaks to them: JSON-RPC (evm_rpc), transactions
and ERC-20 calls (evm), the CCTP and CCIP codecs (cctp, ccip), Circle's
attestation client (cctp_client), the burn allowance setup step
(cctp_allowance). The local chains the tests and `qtg chains` run are the
world's (qtg_world.chains)."""
