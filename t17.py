import sys, subprocess; sys.path.insert(0,'/tmp/attack46'); from drv import *
s=Srv()
o=s.start('p','sleep 2; curl -s -m3 "http://[fd99::5]:8082/"; echo; curl -s -m3 http://10.98.0.4:8082/; echo',{'allow':['[fd99::5]','10.98.0.4']})
subprocess.run(['ip','-n','a46srv','route','add','local','10.98.0.0/24','dev','lo'])
print(s.wait_exit('p',30)[0])
s.close()
