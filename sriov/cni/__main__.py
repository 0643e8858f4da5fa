from sriov.cni.plugin import main

main()
