"""Rehearsal of a movement on forks of its chains, before it is approved
(`qtg rehearse MOVEMENT`): the real executors run the movement's plan in a
throwaway engine against anvil forks of the chains, the treasury's accounts
impersonated (no key is needed or held), the off-chain services the local
doubles; the summary is printed and recorded on the movement for its
approver.

It stands outside the runtime (qtg_runner never imports it) and uses the
local world's doubles (qtg_world: the Iris double, the attester keys, the
anvil binary). Modules: proxy (the forks' RPC, sends as the treasury),
stand_ins (the signers in place of the treasury's keys), forks (anvil forks
and their CCTP attesters), engine (the throwaway engine), rehearse (one
rehearsal and its summary), command (the CLI).
"""
