"""The lag job as spark-submit's main file (a file, not a module, which spark-submit needs):
``spark-submit --master k8s://... --deploy-mode cluster local:///opt/ballast/lagjob.py
--config /etc/ballast/ballast.yaml``. The Helm chart's lag job runs it (docs/pipeline.md,
"Run it on a cluster"); an image copies it to ``/opt/ballast/lagjob.py``."""

import sys

from pipeline.lagjob import main

if __name__ == "__main__":
    sys.exit(main())
