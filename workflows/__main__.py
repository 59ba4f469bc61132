from asepr.workflows.cli import run

run()
