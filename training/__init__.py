"""Local GNN training on one partition and reconciliation (DESIGN.md section 7).

Nothing is exported yet: the trainers arrive with the training issue.
"""

__all__: list[str] = []
