"""`python -m sundial` / `sundial`: run the operator in the foreground."""

from __future__ import annotations

import logging

import kopf

from sundial.config import OperatorConfig


def main() -> None:
    config = OperatorConfig.from_env()
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    import sundial.handlers  # noqa: F401 - registers the kopf handlers

    kopf.run(
        standalone=True,
        clusterwide=not config.namespaces,
        namespaces=config.namespaces,
        liveness_endpoint=f"http://0.0.0.0:{config.health_port}/healthz",
    )


if __name__ == "__main__":
    main()
