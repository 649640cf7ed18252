import sys
from pathlib import Path

# gcloudcontract.py (collection and checks) sits beside the test
sys.path.insert(0, str(Path(__file__).parent))
