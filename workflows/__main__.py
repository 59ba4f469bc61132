from workflows.cli import run

run()
