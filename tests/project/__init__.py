"""The project around the package: docs, examples, packaging, workflows, deploy kit, layout,
linters."""
