"""The decisions: group state and revoke-before-grant handoffs. Pure: no I/O, no
asyncio, every time passed in."""
