# A workshop room on one machine: JupyterHub, one Unix account per learner, one copy of the model's weights.
# Started by `make hub` (setup_kvlib.py hub), which makes the accounts and the shared folder first and passes
# the room in the environment:
#   KVLIB_ROOM           the hub's own folder (its database, cookie secret, the shared kvlib home under it)
#   KVLIB_LEARNERS       the learners' names, comma-separated (learner1,learner2,...)
#   KVLIB_ROOM_PASSWORD  the one password the room shares (on the board)
#   KVLIB_TEACHER_PASSWORD  the teacher's own (the teacher logs in as `teacher` and sees who is in)
#   KVLIB_HUB_PORT       where the room opens its browser tabs (default 8000)
#
# Who may log in: a room shares one password (SharedPasswordAuthenticator, JupyterHub 5+), because a workshop
# has no accounts to check against and no time to make them; only the names on the list are let in, so a
# stranger who reads the board cannot pick a name of their own. The teacher's password is another.
# Who may read what: each learner's server and kernels run as their own Unix account (LocalProcessSpawner,
# the hub running as root), in a home only they can read (mode 700): a learner can neither read nor change
# another's notebooks, nor signal their processes; the hub refuses one learner's token on another's server.
# One copy of the model: every server reads kvlib's home in the room's folder, where the weights files were
# written once (kvlib/model/weights_file.py), read-only for the learners: their kernels map the same pages.
import os
import sys
from pathlib import Path

room = Path(os.environ["KVLIB_ROOM"])
learners = [n for n in os.environ["KVLIB_LEARNERS"].split(",") if n]
bin_dir = Path(sys.executable).parent  # the environment kvlib is installed in: its kvlib and jupyterhub-singleuser

c = get_config()  # noqa: F821 (JupyterHub's config loader defines it)
c.JupyterHub.bind_url = f"http://:{os.environ.get('KVLIB_HUB_PORT', '8000')}"
c.JupyterHub.db_url = f"sqlite:///{room / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(room / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.command = [str(Path(__file__).parent / "node_modules" / ".bin" / "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(room / "proxy.pid")

c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = os.environ["KVLIB_ROOM_PASSWORD"]
c.SharedPasswordAuthenticator.admin_password = os.environ["KVLIB_TEACHER_PASSWORD"]
c.Authenticator.allowed_users = set(learners)
c.Authenticator.admin_users = {"teacher"}

# each learner lands in their own copy of the course (kvlib lab's copy: their edits are never overwritten)
c.Spawner.cmd = ["/bin/sh", "-c", f'"{bin_dir}/kvlib" lab "$HOME/kvlib-course" --copy-only && '
                 f'exec "{bin_dir}/jupyterhub-singleuser" "$@"', "kvlib-learner"]
c.Spawner.notebook_dir = "~/kvlib-course"
c.Spawner.default_url = "/lab/tree/01_generation_loop.ipynb"
# MALLOC_MMAP_THRESHOLD_: a tensor over 128 kB gets its own mapping, returned to the system when freed (glibc's
# moving threshold otherwise keeps freed tensors in the heap: measured, a kernel after notebook 5 kept 0.13 GB
# more private memory without it)
c.Spawner.environment = {"KVLIB_HOME": str(room / "kvlib-home"), "OMP_WAIT_POLICY": "PASSIVE",
                         "MALLOC_MMAP_THRESHOLD_": "131072", "PATH": f"{bin_dir}:/usr/bin:/bin"}
c.Spawner.http_timeout = 120  # a 2-core machine starting thirty servers at once is slow to answer
c.Spawner.start_timeout = 180
# a learner's kernel that dies (out of memory, say) is restarted by JupyterLab's own kernel manager; the
# learner's server stays up, and a server stopped by the teacher starts again at the learner's next visit
