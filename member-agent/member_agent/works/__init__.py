"""The agent's side of the hub's Works, by concern (wired together by :mod:`.sync`):

- :mod:`.watch`: the Works of this member's hub namespace as the hub says, and their fences;
- :mod:`.book`: the Works this agent has applied, the registry the other parts read;
- :mod:`.applying`: a Work's manifests applied to the member, and drift put back;
- :mod:`.removing`: copies removed from the member: purged Works, fenced stale copies;
- :mod:`.holds`: reservation mode's placeholder pods;
- :mod:`.status`: each Work's status reported to the hub when what it reports changes.
"""
