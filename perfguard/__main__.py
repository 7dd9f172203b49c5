"""``python -m perfguard`` runs the CLI (used by tests and by worktrees of other commits)."""

from perfguard.cli import main

if __name__ == "__main__":
    main()
